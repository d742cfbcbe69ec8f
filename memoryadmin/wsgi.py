from __future__ import annotations

import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryadmin.settings")

application = get_wsgi_application()

if settings.MEMORYADMIN_BENCH_FLOORS:
    # `make bench` only: one path answered before Django, the floor of the stack's cost.
    from memoryadmin.benchfloors import raw_wsgi

    application = raw_wsgi(application)  # type: ignore[assignment]
