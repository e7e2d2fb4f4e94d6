"""The playground: a short-lived key, then the browser calls ``/v1`` itself (streaming)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from accounts.selectors import projects_for_organization
from dashboard import catalog_reads, services
from dashboard.forms import PlaygroundForm
from dashboard.permissions import USE_KEYS, OrgContext, org_view
from dashboard.views.common import no_store, render_org


@org_view(USE_KEYS)
def playground(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    """GET: pick a project. POST: mint a one-hour key for this page and open the chat box.

    The key lives only in the rendered page (never stored server-side in clear); reloading
    asks for a new one. It is listed with the other keys and can be revoked there.
    """
    projects = projects_for_organization(organization=ctx.organization)
    form = PlaygroundForm(request.POST or None, projects=projects)
    context: dict[str, object] = {
        "form": form,
        "has_projects": projects.exists(),
        "modes": catalog_reads.ROUTING_MODES,
        # The playground sends chat completions: embedding, speech, … models would only fail.
        "models": [m for m in catalog_reads.model_prices() if "chat" in m.capabilities],
    }
    if request.method == "POST" and form.is_valid():
        api_key, raw = services.playground_key_create(
            project=form.cleaned_data["project"], user=ctx.user
        )
        context.update(api_key=api_key, raw_key=raw)
    return no_store(render_org(request, ctx, "dashboard/playground.html", context))
