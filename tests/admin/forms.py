"""What a browser would submit from an admin page's form, read from the page's HTML, so a
test posts a whole change form (every field and inline formset) with only its edits."""

from __future__ import annotations

from html.parser import HTMLParser


class _FormReader(HTMLParser):
    """The successful controls of the first ``<form>`` whose id is ``form_id`` (any form when
    empty): inputs with a value (checkboxes and radios only when checked), selected options,
    textareas. Submit buttons are left out."""

    def __init__(self, form_id: str) -> None:
        super().__init__(convert_charrefs=True)
        self.form_id = form_id
        self.inside = False
        self.done = False
        self.fields: list[tuple[str, str]] = []
        self._select: str | None = None
        self._textarea: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form" and not self.done and (not self.form_id or a.get("id") == self.form_id):
            self.inside = True
        if not self.inside:
            return
        name = a.get("name")
        if tag == "input" and name and "disabled" not in a:
            kind = a.get("type", "text").lower()
            if kind in ("submit", "button", "image", "reset", "file"):
                return
            if kind in ("checkbox", "radio") and "checked" not in a:
                return
            self.fields.append((name, a.get("value", "on" if kind == "checkbox" else "")))
        elif tag == "select" and name:
            self._select = name
        elif tag == "option" and self._select and "selected" in a:
            self.fields.append((self._select, a.get("value", "")))
        elif tag == "textarea" and name:
            self._textarea, self._text = name, []

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "form" and self.inside:
            self.inside, self.done = False, True
        elif tag == "select":
            self._select = None
        elif tag == "textarea" and self._textarea is not None:
            text = "".join(self._text)
            self.fields.append((self._textarea, text[1:] if text.startswith("\n") else text))
            self._textarea = None


def form_fields(html: str, form_id: str = "") -> list[tuple[str, str]]:
    """The (name, value) pairs the form ``form_id`` of ``html`` submits as it is shown."""
    reader = _FormReader(form_id)
    reader.feed(html)
    return reader.fields


def form_data(html: str, form_id: str = "", **changes: str | list[str] | None) -> dict[str, object]:
    """:func:`form_fields` as a dict for Django's test client (repeated names become lists),
    with ``changes`` applied: a value replaces the field's, ``None`` leaves it out (an unticked
    checkbox), a list gives every value of a multiple choice."""
    data: dict[str, object] = {}
    for name, value in form_fields(html, form_id):
        if name in data:
            prior = data[name]
            data[name] = [*prior, value] if isinstance(prior, list) else [prior, value]
        else:
            data[name] = value
    data.pop("csrfmiddlewaretoken", None)
    for name, value in changes.items():
        if value is None:
            data.pop(name, None)
        else:
            data[name] = value
    return data
