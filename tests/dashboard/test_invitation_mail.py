"""An organization name with line breaks cannot add headers to the invitation e-mail."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core import mail
from django.utils import timezone

from accounts.models import Invitation
from accounts.services import organization_create
from dashboard.services import invitation_email_send


@pytest.mark.django_db
def test_invitation_subject_is_one_line_whatever_the_organization_name():
    org = organization_create(name="Acme\r\nBcc: victim@example.com\nX: y")
    invitation = Invitation.objects.create(
        organization=org,
        email="new@example.com",
        token_hash="0" * 64,
        expires_at=timezone.now() + dt.timedelta(days=7),
    )
    invitation_email_send(invitation=invitation, accept_url="http://testserver/accept/x")
    (message,) = mail.outbox
    assert message.subject == "You are invited to Acme Bcc: victim@example.com X: y on infrai"
    assert message.to == ["new@example.com"] and not message.bcc
