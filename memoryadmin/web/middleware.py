"""The Memory page's answer to a method its route does not take, in the site's layout."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from memoryadmin.web.views.errors import site_error_page

NOT_ALLOWED = (
    "This address takes a form's submission, not a visit, so there is no page here. "
    "Go back to the page the form was on and send it again."
)


class MethodNotAllowedPages:
    """A page route's 405 (Django's, with no body: `require_POST` and its kind) becomes the
    site's error page with the same Allow header. A form's address is reached by a visit
    when a refused form left it in the address bar and the page is opened again from
    there, from a bookmark or from the history; it was a blank page."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code != 405 or response.content:
            return response
        page = site_error_page(request, 405, NOT_ALLOWED)
        if "Allow" in response:
            page["Allow"] = response["Allow"]
        return page
