"""The live page: the board (what the worker has seen), its SVG/HTML rendering, and the routes
that serve both on the worker's web port. Only `routes` imports Faust."""
