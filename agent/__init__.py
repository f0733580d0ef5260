"""synergy-agent: the node agent that runs synergyd's decisions on a server (docs/agent.md)."""

VERSION = "0.1.0"
