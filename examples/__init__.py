"""Example training jobs for Synergy: ordinary PyTorch scripts with the one-line SynergyIterator wrap.

A package only so that the examples can share `examples.common` and the image data helpers;
each `train.py` also runs as a plain file (`python examples/<name>/train.py`).
"""
