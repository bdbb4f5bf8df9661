"""Integration-test settings that huggingface_hub reads at import time: no xet, a throwaway HF_HOME, no token;
and a host-wide lock file of this test session, so the suite neither waits for nor blocks a real kimik3 on the host."""

import os
import tempfile

os.environ["HF_HUB_DISABLE_XET"] = "1"
os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="kimik3-hf-home-")
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
for name in ("HF_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_HUB_CACHE"):
    os.environ.pop(name, None)
os.environ["KIMIK3_HOST_LOCK"] = os.path.join(tempfile.mkdtemp(prefix="kimik3-host-lock-"), "kimik3.lock")
