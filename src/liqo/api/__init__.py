"""The API of liqo: custom resources (schemas, printer columns), and the names every component agrees on."""
