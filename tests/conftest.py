import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# tests/ holds plugin backends used through module:Class specs
sys.path.insert(0, str(ROOT / "tests"))
