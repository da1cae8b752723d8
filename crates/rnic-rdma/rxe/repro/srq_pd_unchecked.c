/* A QP of one PD can be created on a shared receive queue of another PD. */
#include "repro.h"

int main(void)
{
	struct dev d;
	struct ibv_pd *pd, *pd2;
	struct ibv_srq *srq;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };

	repro_name = "srq-pd-unchecked";
	d = open_dev();
	pd = ibv_alloc_pd(d.ctx);
	pd2 = ibv_alloc_pd(d.ctx);
	CHECK(pd && pd2, "ibv_alloc_pd");
	srq = ibv_create_srq(pd, &sa);
	CHECK(srq, "ibv_create_srq");
	cq = ibv_create_cq(d.ctx, 4, NULL, NULL, 0);
	CHECK(cq, "ibv_create_cq");
	qp = new_qp(&d, pd2, cq, cq, srq);
	if (qp) {
		ibv_destroy_qp(qp);
		verdict(1, "ibv_create_qp on another PD's SRQ succeeded");
	}
	verdict(0, "ibv_create_qp: %s", strerror(errno));
}
