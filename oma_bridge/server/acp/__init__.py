"""The ACP facade: every profile served as an ACP agent (``docs/acp.md``, "The facade")."""
