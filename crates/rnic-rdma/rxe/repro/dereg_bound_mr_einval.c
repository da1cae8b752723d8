/* ibv_dereg_mr of a region with a bound window fails with EINVAL, not EBUSY. */
#include "repro.h"

int main(void)
{
	struct dev d;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_mw *mw;
	struct pair p;
	enum ibv_wc_status st;
	int rc;

	repro_name = "dereg-bound-mr-einval";
	d = open_dev();
	pd = ibv_alloc_pd(d.ctx);
	CHECK(pd, "ibv_alloc_pd");
	mr = new_mr(pd, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	p = connect_pair(&d, pd, pd);
	mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	CHECK(mw, "ibv_alloc_mw");
	st = bind_mw_on(p.req, p.req_cq, mw, mr, 0, 64, IBV_ACCESS_REMOTE_READ);
	if (st != IBV_WC_SUCCESS)
		die("bind: %s", ibv_wc_status_str(st));
	rc = ibv_dereg_mr(mr);
	if (rc == 0)
		die("dereg_mr of a region with a bound window succeeded");
	if (rc == EBUSY)
		verdict(0, "EBUSY");
	if (rc != EINVAL)
		die("dereg_mr: %s", strerror(rc));
	verdict(1, "EINVAL");
}
