"""agent-fabric: a small, fast, local-first runner for tool-using LLM agents."""

__version__ = "0.1.0"
