"""What the demo's unit tests share: the repository's python/ on the path,
and exit 77 (skipped by ctest) without torch or grpc, which the gift_ps
package imports. Import it first: `import demo_test_env  # noqa: F401`."""

import os
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "python"))

try:
    import torch  # noqa: F401
    import grpc  # noqa: F401
except ImportError as e:
    print(f"SKIP: {sys.executable} cannot import {e.name}", file=sys.stderr)
    sys.exit(77)
