"""fedmor server_app (work in progress)."""
