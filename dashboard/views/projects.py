"""Projects: list and create, rename and budget, archive."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from accounts.selectors import project_get, projects_for_organization
from accounts.services import project_archive, project_create, project_unarchive, project_update
from dashboard.forms import ProjectForm
from dashboard.permissions import MANAGE_ORG, OrgContext, org_view
from dashboard.views.common import raise_404, render_org
from money.usd import NANOS_PER_USD

if TYPE_CHECKING:
    from accounts.models import Project


def _list_page(
    request: HttpRequest, ctx: OrgContext, form: ProjectForm, *, status: int = 200
) -> HttpResponse:
    projects = projects_for_organization(organization=ctx.organization, include_archived=True)
    return render_org(
        request,
        ctx,
        "dashboard/projects.html",
        {"projects": projects.order_by("archived_at", "name"), "form": form},
        status=status,
    )


def _project(ctx: OrgContext, project_id: int) -> Project:
    """The organization's project with that id; 404 for a missing one and another tenant's
    alike."""
    project = project_get(organization=ctx.organization, project_id=project_id)
    if project is None:
        raise_404()
    return project


@org_view()
def project_list(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    """All projects (archived ones last); owners and admins also see the create form."""
    return _list_page(request, ctx, ProjectForm(organization_id=ctx.organization.pk))


@org_view(MANAGE_ORG)
@require_POST
def project_create_view(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    form = ProjectForm(request.POST, organization_id=ctx.organization.pk)
    if not form.is_valid():
        return _list_page(request, ctx, form, status=400)
    project = project_create(
        organization=ctx.organization,
        name=form.cleaned_data["name"],
        monthly_budget_nanos=form.cleaned_data["monthly_budget_nanos"],
        actor=ctx.actor,
    )
    messages.success(request, f"Created project {project.name}. Now create a key for it.")
    return redirect("dashboard:keys", slug=ctx.organization.slug)


@org_view(MANAGE_ORG)
def project_edit(request: HttpRequest, ctx: OrgContext, project_id: int) -> HttpResponse:
    project = _project(ctx, project_id)
    budget = project.monthly_budget_nanos
    initial = {
        "name": project.name,
        "monthly_budget_usd": None if budget is None else Decimal(budget) / NANOS_PER_USD,
    }
    form = ProjectForm(
        request.POST or None,
        initial=initial,
        organization_id=ctx.organization.pk,
        project_id=project.pk,
    )
    if request.method == "POST" and form.is_valid():
        project_update(
            project=project,
            name=form.cleaned_data["name"],
            monthly_budget_nanos=form.cleaned_data["monthly_budget_nanos"],
            actor=ctx.actor,
        )
        messages.success(request, f"Saved project {project.name}.")
        return redirect("dashboard:projects", slug=ctx.organization.slug)
    return render_org(
        request, ctx, "dashboard/project_edit.html", {"project": project, "form": form}
    )


@org_view(MANAGE_ORG)
@require_POST
def project_archive_toggle(request: HttpRequest, ctx: OrgContext, project_id: int) -> HttpResponse:
    project = _project(ctx, project_id)
    if project.archived_at is None:
        project_archive(project=project, actor=ctx.actor)
        messages.success(request, f"Archived {project.name}: its keys no longer work.")
    else:
        project_unarchive(project=project, actor=ctx.actor)
        messages.success(request, f"Restored {project.name}.")
    return redirect("dashboard:projects", slug=ctx.organization.slug)
