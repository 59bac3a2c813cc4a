#!/usr/bin/env bash
# Print the LD_LIBRARY_PATH that lets onnxruntime-gpu load CUDA and cuDNN from the pip
# packages of an existing installation (PyTorch's nvidia/*/lib folders), for example
#   eval "$(scripts/gpu_env.sh /path/to/python-with-torch)"
# The server also calls onnxruntime.preload_dlls() itself, which finds those packages when
# they are installed for the interpreter that runs it; this is for the other cases. A
# LD_LIBRARY_PATH already set stays first, so a caller's own copies win over these.
set -euo pipefail
PY="${1:-python3}"
"$PY" - <<'PYEOF'
import glob
import os
import sys

try:
    import nvidia
except ImportError:
    sys.exit("gpu_env.sh: this Python has no 'nvidia' packages (install torch or nvidia-*-cu13)")
dirs = sorted(
    {
        os.path.dirname(path)
        for root in nvidia.__path__
        for path in glob.glob(os.path.join(root, "**", "lib*.so*"), recursive=True)
    }
)
if not dirs:
    sys.exit("gpu_env.sh: no CUDA libraries found under " + ", ".join(nvidia.__path__))
print('export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}' + ":".join(dirs) + '"')
PYEOF
