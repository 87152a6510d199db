"""Generated ALFWorld games: new layouts, objects and goals in the shipped domain, with a planner expert."""
