"""The rule book: every door (API, Memory page, CLI, agent tools) calls these."""
