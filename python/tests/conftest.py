"""Make ``import k3ref`` work for ``pytest python/tests`` from the repo root."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
