"""fedmor client_app (work in progress)."""
