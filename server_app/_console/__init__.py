"""The operator's web console: one-time login links and sessions (``_auth``), its routes
(``_api``), the page and what it gathers (``_page``, its template and stylesheet in
``_assets/``) and the alignment chart drawn on the server (``_chart``).
"""
