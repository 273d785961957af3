"""Who calls: every request's identity and role, and the admin token (``_access``), the
roster and each identity's lifecycle, enrollment to revocation (``_identities``), and
what each member has given so far (``_usage``).
"""
