import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `examples` (the example scripts' package) from the repository root
sys.path.insert(0, str(ROOT / "tests" / "agent"))  # agent_harness: the real synergy-agent process
