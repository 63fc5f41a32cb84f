"""liqo.virtualkubelet: reflection (Services, endpoints, ConfigMaps...), streams, fit, its serving certificate."""
