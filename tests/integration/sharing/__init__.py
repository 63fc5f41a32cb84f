"""liqo.sharing: offers, and how often a provider rewrites them."""
