"""The app's user interface: what ``app.py`` wires together.

The layout (``tabs``, ``controls``, ``view_tuples``: one builder per tab, each returning its components in a small
dataclass, and the named tuples a handler fills) and the handlers behind it: the server's configuration and
singletons (``config``), the session state (``sessions``), a run with its Stop and forks (``running``,
``forking``), a shown trace with its files (``replay``), Compare (``comparing``), Tokenizers (``tokenizers``),
Results (``results``), the API and MCP tools (``api``, ``api_args``), links (``links``) and the Space (``space``).
Handlers call the engine and the views; none of this is imported by ``ensemble/`` or ``visual/``."""
