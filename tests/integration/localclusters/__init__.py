"""liqo.localclusters: local clusters, their real nodes, liqo's image on them, concurrent ``liqoctl local``."""
