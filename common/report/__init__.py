"""What the static HTML report (tools/fleetctl/report_page.py) and the coordinator's live console
(coordinator/console/) share: the results and status as dicts (shapes.py), the statistics
(stats.py), the enums' names (names.py) and the HTML (html.py). Pure: no I/O, no clock."""
