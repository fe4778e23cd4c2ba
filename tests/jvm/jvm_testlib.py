"""Shared by tests/jvm/check_*.py."""
import os
import shutil


def fresh_work(work):
    """An empty WORKDIR, its trace path, and an environment with a private
    daemon socket there and no JAVA_TOOL_OPTIONS or XDG_RUNTIME_DIR of the
    caller's."""
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ)
    env.pop("XDG_RUNTIME_DIR", None)
    env.pop("JAVA_TOOL_OPTIONS", None)
    env["STRATA_CONSUMERD_SOCKET"] = os.path.join(work, "consumerd.sock")
    return os.path.join(work, "trace"), env
