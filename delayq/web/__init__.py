"""delayq's HTTP API and dashboard (``pip install delayq[web]``): send, consume and operate
a queue from any language and from a browser.

    from delayq.web import Tokens, create_app

    app.mount("/delayq", create_app(queue, Tokens.from_file("tokens")))
"""

from delayq.web.app import create_app
from delayq.web.auth import Scope, Tokens

__all__ = ["Scope", "Tokens", "create_app"]
