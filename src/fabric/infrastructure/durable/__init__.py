"""Durable runs on DBOS (ADR 0020)."""
