"""Django's template backend, whose renders leave no reference cycle behind.

Django's `make_context` pushes the view's context onto the request context as a
`ContextDict`, which holds the context it is pushed on, and nothing pops it: the
context, the view's values (a list's rows and all they hold) and the request stay in
a cycle that only the garbage collector's passes free, on the Memory page one every 15
to 30 pages (about 450 us each, docs/performance.md). Once a render is done its
context is read by nothing (the test client keeps a copy), so it is emptied.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.template import TemplateDoesNotExist
from django.template.backends import django as backend
from django.template.context import make_context
from django.utils.safestring import SafeString


class Template(backend.Template):
    def render(
        self, context: dict[str, Any] | None = None, request: HttpRequest | None = None
    ) -> SafeString:
        made = make_context(context, request, autoescape=self.backend.engine.autoescape)
        try:
            rendered: SafeString = self.template.render(made)
            return rendered
        except TemplateDoesNotExist as exc:
            backend.reraise(exc, self.backend)
            raise  # reraise always raises
        finally:
            made.dicts.clear()


class DjangoTemplates(backend.DjangoTemplates):
    def from_string(self, template_code: str) -> Template:
        return Template(super().from_string(template_code).template, self)

    def get_template(self, template_name: str) -> Template:
        return Template(super().get_template(template_name).template, self)
