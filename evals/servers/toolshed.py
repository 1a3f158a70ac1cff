"""toolshed: an MCP server with the 120 tools of Harrowgate Freight's internal systems, a
made-up road haulier, for the eval suite ``evals/many-tools`` (tool search, ADR 0028). A case
there needs one or two of them; the rest are what a company's many MCP servers offer besides.

Standard library only: newline-delimited JSON-RPC on stdin and stdout, the ``initialize``
handshake of the older protocol revisions (``protocol: legacy`` in fabric.yaml), then
``tools/list`` (one page) and ``tools/call``. Every answer comes from the tables below, so a
run gets the same answers every time. Run: python3 toolshed.py"""

from __future__ import annotations

import json
import sys
from typing import Any

SYSTEMS = {
    "fleet": ("truck", "trucks", "the fleet register"),
    "drivers": ("driver", "drivers", "the drivers' roster"),
    "depots": ("depot", "depots", "the depot directory"),
    "customs": ("customs declaration", "customs declarations", "the customs desk's system"),
    "rates": ("tariff sheet", "tariff sheets", "the rates system"),
    "invoices": ("invoice", "invoices", "accounts receivable"),
    "customers": ("customer account", "customer accounts", "the CRM"),
    "claims": ("damage claim", "damage claims", "the claims desk's system"),
    "warehouse": ("storage location", "storage locations", "the warehouse system"),
    "tracking": ("consignment", "consignments", "consignment tracking"),
    "hr": ("employee record", "employee records", "the HR system"),
    "it": ("support ticket", "support tickets", "the IT helpdesk"),
}
ACTIONS = {
    "find": "Find {many} by name or number in {where}.",
    "get": "Everything {where} holds about one {one}.",
    "list": "List the {many} in {where}, newest first.",
    "create": "Add a {one} to {where}.",
    "update": "Change one field of a {one} in {where}.",
    "archive": "Archive a {one} that is no longer in use.",
    "history": "The change history of a {one}: who changed what, when.",
    "export": "Export the {many} of {where} as CSV.",
    "report": "This month's summary report on the {many}.",
    "owner": "Who at Harrowgate is responsible for a {one}.",
}
COUNTRY = {
    "type": "object",
    "properties": {
        "country": {"type": "string", "description": "Two-letter ISO country code, e.g. DE."}
    },
    "required": ["country"],
}
SPECIAL = {
    # (system, action) replaced: the tools a case needs, and the ones that sound like them
    ("rates", "get"): (
        "rates_fuel_surcharge",
        "The fuel surcharge in force for road freight to a country, as a percentage of the "
        "base tariff, and since when.",
        COUNTRY,
    ),
    ("rates", "find"): (
        "rates_base_tariff",
        "The base road freight tariff to a country, in euros a kilogram.",
        COUNTRY,
    ),
    ("rates", "update"): (
        "rates_toll_surcharge",
        "Road toll surcharges billed per consignment to a country.",
        COUNTRY,
    ),
    ("fleet", "get"): (
        "fleet_fuel_level",
        "Fuel level and remaining range of a truck, from its telematics unit.",
        {"type": "object", "properties": {"truck": {"type": "string"}}, "required": ["truck"]},
    ),
    ("fleet", "update"): (
        "fleet_fuel_cards",
        "The fuel cards issued to a truck, and what was spent on each this month.",
        {"type": "object", "properties": {"truck": {"type": "string"}}, "required": ["truck"]},
    ),
    ("customs", "get"): (
        "customs_duty_rate",
        "The import duty rate for a goods code into a country.",
        {
            "type": "object",
            "properties": {"goods_code": {"type": "string"}, "country": {"type": "string"}},
            "required": ["goods_code", "country"],
        },
    ),
    ("invoices", "get"): (
        "invoices_surcharges",
        "The surcharges billed on one invoice (fuel, toll, weekend delivery).",
        {"type": "object", "properties": {"invoice": {"type": "string"}}, "required": ["invoice"]},
    ),
}
FUEL = {
    "DE": "8 % of the base tariff, in force since 2026-03-01",
    "NL": "8 % of the base tariff, in force since 2026-03-01",
    "SE": "10 % of the base tariff, in force since 2026-06-01",
    "NO": "17.5 % of the base tariff, in force since 2026-11-01 (it was 12 % before)",
}
TARIFF = {"DE": "0.42", "NL": "0.45", "SE": "0.58", "NO": "0.60"}
NAMES = {"GERMANY": "DE", "NETHERLANDS": "NL", "SWEDEN": "SE", "NORWAY": "NO"}
QUERY = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": "A name, number or word."}},
}


def tools() -> list[dict[str, Any]]:
    """The 120 tools, system by system."""
    listed = []
    for system, (one, many, where) in SYSTEMS.items():
        for action, text in ACTIONS.items():
            name, description, schema = SPECIAL.get(
                (system, action),
                (f"{system}_{action}", text.format(one=one, many=many, where=where), QUERY),
            )
            listed.append({"name": name, "description": description, "inputSchema": schema})
    return listed


def answer(name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
    """A tool's answer and whether it is an error."""
    if name in ("rates_fuel_surcharge", "rates_base_tariff", "rates_toll_surcharge"):
        given = str(arguments.get("country", "")).strip().upper()
        code = NAMES.get(given, given)
        if code not in FUEL:
            return f"Harrowgate ships to DE, NL, SE and NO, not to {given!r}.", True
        if name == "rates_fuel_surcharge":
            return f"Fuel surcharge for {code}: {FUEL[code]}.", False
        if name == "rates_base_tariff":
            return f"Base tariff for {code}: {TARIFF[code]} EUR/kg.", False
        return f"Toll surcharge for {code}: billed at cost per consignment.", False
    if name == "customs_duty_rate":
        return "Duty: 0 % within the EEA; see the customs desk for other goods codes.", False
    if name.startswith("fleet_fuel"):
        return f"Truck {arguments.get('truck', '?')}: no telematics data this week.", False
    if name == "invoices_surcharges":
        return f"Invoice {arguments.get('invoice', '?')}: no such invoice.", True
    return f"{name}: nothing matches {str(arguments.get('query', ''))[:80]!r}.", False


def handle(request: dict[str, Any]) -> dict[str, Any] | None:
    """The response to one message (None for a notification)."""
    method, params = request.get("method"), request.get("params") or {}
    if "id" not in request:
        return None
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "toolshed", "version": "1.0"},
        }
    elif method == "tools/list":
        result = {"tools": tools()}
    elif method == "tools/call":
        text, error = answer(str(params.get("name")), params.get("arguments") or {})
        result = {"content": [{"type": "text", "text": text}], "isError": error}
    elif method == "ping":
        result = {}
    else:
        error = {"code": -32601, "message": f"no method {method}"}
        return {"jsonrpc": "2.0", "id": request["id"], "error": error}
    return {"jsonrpc": "2.0", "id": request["id"], "result": result}


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        response = handle(json.loads(line))
        if response is not None:
            sys.stdout.write(json.dumps(response) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
