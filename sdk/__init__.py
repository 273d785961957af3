"""fedmor SDK: the library a consortium member embeds.

Subpackages each own one concept and re-export their public API:
``sdk.data`` (preference data), ``sdk.models`` (offline VLM backbones), ``sdk.reward``
(client reward models), ``sdk.secagg`` (secure aggregation), ``sdk.router`` (stage B).
"""

from sdk._version import __version__

__all__ = ["__version__"]
