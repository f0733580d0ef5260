import sys
from pathlib import Path

here = Path(__file__).parent
sys.path.insert(0, str(here.parent / "agent"))  # agent_harness: the real synergy-agent process
