"""Structured logs: one JSON object per line, with an `event` name and typed fields (every
program: synergyd and synergy-agent; `synergy.scheduler.daemon.logs` re-exports it for the daemon).

Decisions are logged as events (`job.placed`, `job.waiting`, `round.applied`, ...) so that
"why does my job wait?" is answerable with grep/jq. Tokens are never passed to the logger.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

LOGGER = "synergyd"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "event": record.getMessage(),
        }
        out.update(getattr(record, "fields", {}))
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{k}={v}" for k, v in getattr(record, "fields", {}).items())
        line = f"{self.formatTime(record)} {record.levelname.lower():7} {record.getMessage()} {fields}".rstrip()
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure(level: str = "info", fmt: str = "json", name: str = LOGGER) -> logging.Logger:
    """Structured logs on stderr for one program (synergyd, or `name="synergy-agent"`)."""
    log = logging.getLogger(name)
    log.handlers.clear()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    log.addHandler(handler)
    log.setLevel(level.upper())
    log.propagate = False
    return log


def event(log: logging.Logger, what: str, /, level: int = logging.INFO, exc_info: bool = False, **fields: Any) -> None:
    """Log one structured event (`what` plus fields; `exc_info` adds the current traceback)."""
    if log.isEnabledFor(level):
        log.log(level, what, exc_info=exc_info, extra={"fields": fields})
