"""A gang's shape is hashed once (`core.hashed.HashedTuple`): it stays the plain tuple's hash
and equal to it, so the two mix as keys, also where a spec is read back in another
process (a hash of a string differs between processes)."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

from tests.unit.builders import gang, spec

ROOT = Path(__file__).resolve().parents[2]
READ_BACK = """
import pickle, sys
shape = pickle.loads(sys.stdin.buffer.read()).shape
plain = tuple(shape)
print(hash(shape) == hash(plain), {plain: 1}.get(shape))
"""


def test_a_shape_hashes_and_compares_as_its_plain_tuple():
    shape = spec("g", "2xGPU=1 + CPU=1", "STRICT_PACK").shape
    plain = (shape[0], shape[1], shape[2])
    assert shape == plain and hash(shape) == hash(plain)
    assert {plain: "found"}[shape] == "found" and {shape: "found"}[plain] == "found"
    assert gang("a", "2xGPU=1").shape == gang("b", "2xGPU=1").shape  # two specs, one shape


def test_a_spec_read_back_in_another_process_hashes_its_shape_there():
    first = spec("g", "4xGPU=1", "PACK")
    assert hash(first.shape)  # worked out here, kept with the spec
    done = subprocess.run([sys.executable, "-c", READ_BACK], input=pickle.dumps(first),
                          capture_output=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.decode().split() == ["True", "1"]
