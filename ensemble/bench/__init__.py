"""``python -m ensemble bench``: ``measure`` takes the measurements, ``report`` writes them as the lines the
command prints."""
