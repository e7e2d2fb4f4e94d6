"""Accessible names for the admin's form controls that Django leaves unnamed.

Django's admin labels a split date-time field with one ``<label>`` that points at neither of its
two inputs, and a tabular inline's only label for each cell is its column header. Both are
"form elements must have labels" (axe-core: critical). :class:`NamedWidgets` gives every such
control an ``aria-label`` (``"Created at: date"``, ``"Vendor"``) where the form field is built,
so each admin opts in with one base class and no template is copied.
"""

from __future__ import annotations

import copy
from typing import Any

from django import forms
from django.contrib.admin import widgets
from django.contrib.admin.options import InlineModelAdmin
from django.forms.utils import pretty_name
from django.http import HttpRequest


def name_widget(field: forms.Field, *, label: str, in_table: bool) -> None:
    """Give ``field``'s controls an accessible name from ``label``: each input of a split
    date-time ("<label>: date" / "<label>: time"); when ``in_table`` (a tabular inline cell,
    labelled only by its column header), the control itself."""
    widget = field.widget
    inner = widget.widget if isinstance(widget, widgets.RelatedFieldWidgetWrapper) else widget
    if isinstance(inner, forms.SplitDateTimeWidget):
        date, time = inner.widgets
        date.attrs.setdefault("aria-label", f"{label}: date")
        time.attrs.setdefault("aria-label", f"{label}: time")
    elif in_table and not isinstance(inner, forms.HiddenInput):
        inner.attrs.setdefault("aria-label", label)


def name_form_fields(form: Any, *, in_table: bool) -> None:
    """Name the controls of every field of the form class ``form`` (:func:`name_widget`).

    Each field is copied first: a form class the admin builds shares its declared fields with
    the form it was built from, which another page may show differently."""
    for name, field in list(form.base_fields.items()):
        named = copy.deepcopy(field)
        name_widget(named, label=str(field.label or pretty_name(name)), in_table=in_table)
        form.base_fields[name] = named


class NamedWidgets:
    """A ``ModelAdmin`` / inline base: its forms' controls get accessible names."""

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)  # type: ignore[misc]
        name_form_fields(form, in_table=False)
        return form

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        formset = super().get_formset(request, obj, **kwargs)  # type: ignore[misc]
        tabular = isinstance(self, InlineModelAdmin) and "tabular" in (self.template or "")
        name_form_fields(formset.form, in_table=tabular)
        return _with_named_delete(formset) if tabular else formset


def _with_named_delete(formset: Any) -> Any:
    """``formset`` whose per-row "delete" checkbox (added by the formset, not the form) is
    named after its row: "Delete row 2"."""

    def add_fields(self: Any, form: forms.BaseForm, index: int | None) -> None:
        formset.add_fields(self, form, index)
        delete = form.fields.get("DELETE")
        if delete is not None:
            row = f" row {index + 1}" if index is not None else ""
            delete.widget.attrs.setdefault("aria-label", f"Delete{row}")

    return type(formset.__name__, (formset,), {"add_fields": add_fields})
