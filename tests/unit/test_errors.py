"""Errors a user sees say what happened and what to do; their codes are stable for JSON output
and runlogs."""

from __future__ import annotations

import pytest

from fabric.domain import errors


@pytest.mark.parametrize(
    ("error_type", "code"),
    [
        (errors.FabricError, "fabric_error"),
        (errors.ConfigError, "config_error"),
        (errors.PackError, "pack_error"),
        (errors.RunError, "run_error"),
        (errors.ModelError, "model_error"),
        (errors.ModelConnectionError, "network"),
        (errors.ModelAuthError, "authentication"),
        (errors.ModelNotFoundError, "model_not_found"),
        (errors.ModelCapabilityError, "capability"),
        (errors.ModelResponseError, "invalid_response"),
        (errors.ToolError, "tool_error"),
        (errors.ToolArgumentError, "tool_argument_error"),
        (errors.SandboxError, "sandbox_error"),
    ],
)
def test_codes_are_snake_case_names(error_type: type[errors.FabricError], code: str) -> None:
    assert error_type("x").code == code


def test_str_is_the_message_then_the_hint() -> None:
    assert str(errors.ConfigError("no pack given")) == "no pack given"
    error = errors.ConfigError("no pack given", hint="pass --pack NAME")
    assert str(error) == "no pack given\n  hint: pass --pack NAME"
    assert (error.message, error.hint) == ("no pack given", "pass --pack NAME")


def test_model_errors_keep_status_and_body() -> None:
    error = errors.ModelAuthError("401", hint="set a key", status_code=401, body='{"e": 1}')
    assert (error.status_code, error.body) == (401, '{"e": 1}')
    assert errors.ModelError("down").status_code is None


def test_the_hierarchy_sorts_configuration_from_run_failures() -> None:
    assert issubclass(errors.PackError, errors.ConfigError)
    assert issubclass(errors.SandboxError, errors.ToolError)
    assert issubclass(errors.ToolArgumentError, errors.ToolError)
    for model_error in (
        errors.ModelConnectionError,
        errors.ModelAuthError,
        errors.ModelNotFoundError,
        errors.ModelCapabilityError,
        errors.ModelResponseError,
    ):
        assert issubclass(model_error, errors.ModelError)
        assert not issubclass(model_error, errors.ConfigError)
    assert issubclass(errors.ToolError, errors.RunError)
    assert not issubclass(errors.ConfigError, errors.RunError)
