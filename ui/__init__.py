"""The app's layout: one builder per tab, each returning its components in a small dataclass.

``app.py`` wires these components to its handlers; nothing here runs a model or builds HTML."""
