from __future__ import annotations

from django.urls import path

from memoryadmin.refprovider import views

app_name = "refprovider"
urlpatterns = [path("oc-memory", views.endpoint, name="endpoint")]
