"""The web console: server-rendered pages over the admin client (docs/console.md). ``console.server`` is
imported only where the console runs, so that the ``tidalmq`` command's start does not load it."""
