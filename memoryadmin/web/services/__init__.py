"""The Memory page's own rules: roles, page data and compound edits over the memory services."""
