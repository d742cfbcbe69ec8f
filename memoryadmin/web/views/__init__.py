"""Views of the Memory page: function views that translate forms and links into service calls."""
