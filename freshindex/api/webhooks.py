"""The old name of :mod:`api.routes_webhooks`, kept only for the imports in ``bench/lag.py`` and
``bench/webhooks.py``; delete it with those imports."""

from freshindex.api.routes_webhooks import Rejected, WebhookIntake, sign_generic

__all__ = ["Rejected", "WebhookIntake", "sign_generic"]
