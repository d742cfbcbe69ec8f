"""memoryadmin: a memory management plane for AI agents."""

# The product's version (as pyproject.toml names it): the MCP server reports it.
__version__ = "0.1.0"
