"""Where both apps keep their state: one SQLite file in WAL mode behind a lock, checkpointed off
the request path, purged by age under the ``[retention]`` settings, and copied with SQLite's
online backup; and the one way a state file (a roster, a manifest) is replaced whole. Each app
defines its own tables on top; this package holds no app's schema.
"""

from sdk.storage._backup import backup_sqlite
from sdk.storage._files import replace_file
from sdk.storage._retention import DAY_S, Retention
from sdk.storage._sqlite import SQLiteFile

__all__: list[str] = ["DAY_S", "Retention", "SQLiteFile", "backup_sqlite", "replace_file"]
