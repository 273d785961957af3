"""Rounds: the manager that opens them and moves each stage by stage (``_manager``), a
live round's decoded spec and server half (``_lookup``), what is recorded beside its
protocol state (``_records``) and the long polls that hand members their work
(``_work``).
"""
