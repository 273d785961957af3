"""fedmor on one host: the local consortium harness and the demo that runs on it.

``LocalConsortium`` starts one server and N member apps as real processes on 127.0.0.1 for
tests, benchmarks and ``fedmor demo``. It sits above both apps and imports neither: it starts them
by module name and talks to them over REST (``_member``, run as its own process, is a member
app handed a Python router update, for tests). Its folder is ``examples/fedmor_local/`` (the
repository's top level is fixed); ``pip install`` installs it beside ``sdk``.
"""

from fedmor_local._local import OPEN_POLICY, LocalConsortium
from fedmor_local._ports import free_port

__all__ = ["OPEN_POLICY", "LocalConsortium", "free_port"]
