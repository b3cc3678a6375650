package mysqltest

import "testing"

func TestServerDSNFollowsTheScriptsPort(t *testing.T) {
	cases := []struct{ name, dsn, port, want string }{
		{"MYSQL_DSN wins", "u:p@tcp(db:3306)/x", "40001", "u:p@tcp(db:3306)/x"},
		{"MESH_MARIADB_PORT moves infra/mariadb.sh's server", "", "40001", "mesh:mesh@tcp(127.0.0.1:40001)/mesh?parseTime=true"},
		{"nothing set is the default server", "", "", DefaultDSN},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("MYSQL_DSN", c.dsn)
			t.Setenv("MESH_MARIADB_PORT", c.port)
			if got := ServerDSN(); got != c.want {
				t.Errorf("ServerDSN() = %q, want %q", got, c.want)
			}
		})
	}
}
