"""fedmor SDK: the library a consortium member embeds.

Subpackages each own one concept and re-export their public API:
``sdk.data`` (preference data), ``sdk.models`` (offline VLM backbones), ``sdk.reward``
(client reward models), ``sdk.secagg`` (secure aggregation), ``sdk.router`` (stage B),
``sdk.alignment`` (stage C), ``sdk.capture`` and ``sdk.wire`` (what crosses the network).
Two small public modules serve every command-line tool: ``sdk.progress`` (progress lines and
bars, quiet mode) and ``sdk.runtime_options`` (``--device`` / ``--dtype`` flags).
:func:`lazy_exports` lets a package (an app's too) import a re-exported name's module on first
use, so a command loads only the modules it calls.

Modules and packages whose name starts with ``_`` are private: no package outside ``sdk``
imports them (``tests/test_architecture.py``).
"""

from sdk._lazy import lazy_exports
from sdk._version import __version__

__all__ = ["__version__", "lazy_exports"]
