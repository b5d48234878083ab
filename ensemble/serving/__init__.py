"""The ensemble as an OpenAI-compatible server (``python -m ensemble serve``, and the same routes on the app's
server): :mod:`.protocol` reads requests and writes answers, :mod:`.routes` runs them on a FastAPI app,
:mod:`.store` keeps their traces for the app to open. Importing this package imports no web framework; the
routes module does (fastapi and uvicorn come with the app's requirements)."""
