"""The playground: chat with any chat model through ``/v1``, from the browser, with the user's
one playground key for the project (the browser calls ``/v1`` itself, streaming)."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.http import urlencode

from accounts.selectors import project_get, projects_for_organization
from dashboard import selectors, services
from dashboard.forms import PlaygroundForm
from dashboard.permissions import USE_KEYS, OrgContext, org_view
from dashboard.views.common import no_store, render_org
from infra.querystring import query_id


@org_view(USE_KEYS)
def playground(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    """GET: pick a project, or (``?project=<id>``) the chat box with the user's playground key
    for it. POST: the project picked → redirect to that GET (a reload never mints a key).

    The key is reused across reloads and visits (:func:`dashboard.services.playground_key`);
    it is listed with the other keys and can be revoked there.
    """
    projects = projects_for_organization(organization=ctx.organization)
    url = reverse("dashboard:playground", args=[ctx.organization.slug])
    if request.method == "POST":
        form = PlaygroundForm(request.POST, projects=projects)
        if form.is_valid():
            query = urlencode({"project": form.cleaned_data["project"].pk})
            return HttpResponseRedirect(f"{url}?{query}")
    else:
        form = PlaygroundForm(projects=projects)
    context: dict[str, object] = {
        "form": form,
        "has_projects": projects.exists(),
        "modes": selectors.ROUTING_MODES,
        # The playground sends chat completions: embedding, speech, … models would only fail.
        "models": [m for m in selectors.model_prices() if "chat" in m.capabilities],
        "base_url": settings.INFRAI_PUBLIC_BASE_URL,
    }
    project_id = query_id(request.GET.get("project", ""))
    project = (
        project_get(organization=ctx.organization, project_id=project_id)
        if project_id is not None
        else None
    )
    if project is not None and project.archived_at is None:
        api_key, raw = services.playground_key(
            project=project, user=ctx.user, session=request.session
        )
        context.update(api_key=api_key, raw_key=raw, project=project)
    return no_store(render_org(request, ctx, "dashboard/playground.html", context))
