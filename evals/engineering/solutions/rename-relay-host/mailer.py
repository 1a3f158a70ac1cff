"""Builds the messages and says where they would go (the network part is mocked in tests)."""

from __future__ import annotations

from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any


@dataclass
class Mailer:
    config: dict[str, Any]

    @property
    def endpoint(self) -> str:
        return f"{self.config['relay_host']}:{self.config['port']}"

    def compose(self, to: str, subject: str, body: str) -> EmailMessage:
        message = EmailMessage()
        message["From"] = self.config["sender"]
        message["To"] = to
        message["Subject"] = subject
        message.set_content(body)
        return message

    def describe(self, message: EmailMessage) -> str:
        return f"{message['Subject']!r} to {message['To']} via {self.endpoint}"
