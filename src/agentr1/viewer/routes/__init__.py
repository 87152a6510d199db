"""The viewer's routers: JSON API under /api (one router per resource), pages, metrics."""
