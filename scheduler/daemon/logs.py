"""synergyd's structured logs: the one definition lives in `synergy.common.logs` (the agent
and the CLI use it too); this name stays for the daemon's modules."""

from synergy.common.logs import LOGGER, JsonFormatter, TextFormatter, configure, event

__all__ = ["LOGGER", "JsonFormatter", "TextFormatter", "configure", "event"]
