"""The node console: a few browser pages served by the daemon on its control (RPC) listener.

A driving adapter like the JSON-RPC methods: its pages call the same methods (and so the same
use cases) over ``POST /ui/rpc`` and watch the same event stream over ``/ui/ws``, authenticated
by a session cookie instead of the RPC token. ``sessions`` holds the one-time login tokens and
the sessions (pure, clock and randomness injected); ``web`` the aiohttp routes and their checks;
``static/`` the pages, one small script and one style sheet (no library, no build step).
"""
