/* ibv_destroy_qp of a QP that still has a type-2 window bound to it stalls for about 50 s:
 * the window holds a reference on the QP, and the kernel waits for it before it frees the QP
 * anyway. Reproduced when the destroy takes more than 10 s. */
#include "repro.h"

int main(void)
{
	struct dev d;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_mw *mw;
	struct pair p;
	enum ibv_wc_status st;
	double t0, took;
	int rc;

	repro_name = "destroy-qp-bound-type2-stall";
	d = open_dev();
	pd = ibv_alloc_pd(d.ctx);
	CHECK(pd, "ibv_alloc_pd");
	mr = new_mr(pd, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	p = connect_pair(&d, pd, pd);
	mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(mw, "ibv_alloc_mw");
	st = bind_mw_on(p.resp, p.resp_cq, mw, mr, 0, 64, IBV_ACCESS_REMOTE_READ);
	if (st != IBV_WC_SUCCESS)
		die("type-2 bind: %s", ibv_wc_status_str(st));
	t0 = now_s();
	rc = ibv_destroy_qp(p.resp);
	took = now_s() - t0;
	if (took > 10)
		verdict(1, "ibv_destroy_qp took %.1f s (%s)", took, rc ? strerror(rc) : "ok");
	verdict(0, "ibv_destroy_qp took %.2f s", took);
}
